"""The two stamped parts of every lesson: the Open in Colab badge and the locked setup cell's source.

Used by tools/release.py (stamping), tools/new_lesson.py (scaffolding) and the template test.
"""
__all__ = ["setup_source", "badge"]

REPO = "https://github.com/trainclinic/trainclinic"
BRANCH = "main"


def badge(lesson, repo=REPO, branch=BRANCH):
    """The "Open in Colab" badge for a lesson's release notebook."""
    path = repo.removeprefix("https://github.com/")
    url = f"https://colab.research.google.com/github/{path}/blob/{branch}/notebooks/{lesson}/{lesson}.ipynb"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def setup_source(repo=REPO, branch=BRANCH, extra=""):
    """The locked setup cell: install trainclinic only when missing (never torch), then pick the device."""
    return (
        "# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.\n"
        "import importlib.util, subprocess, sys\n"
        "if importlib.util.find_spec(\"trainclinic\") is None:\n"
        f"    subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"-q\", \"--no-deps\", \"git+{repo}@{branch}\"], check=True)\n"
        "import torch\n"
        "import trainclinic as tc\n"
        + extra
        + "device = tc.pick_device()\n"
        "tc.banner(device);"
    )
