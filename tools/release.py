"""Regenerate notebooks/ from solutions/ with nbgrader; stamp the repository URL first.

    python tools/release.py                 # stamp + generate every lesson into notebooks/
    python tools/release.py --check         # generate into a temp dir; exit 1 if notebooks/ differs
    python tools/release.py 01 04           # only these lessons (folder names or numbers)
    REPO=https://github.com/you/course BRANCH=main python tools/release.py

The repository URL (for the Colab badge and the setup cell's pip install) comes from REPO / BRANCH,
else from [tool.trainclinic] in pyproject.toml: one setting, stamped everywhere.
"""
import argparse
import filecmp
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from nbcells import badge  # noqa: E402

__all__ = ["lessons", "settings", "stamp", "generate", "main"]

BADGE = re.compile(r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]\([^)]*\)")
INSTALL = re.compile(r'"git\+[^"@]+(?:@[^"]*)?"')


def lessons():
    """Lesson folder names under solutions/, in order."""
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())


def settings():
    """(repository URL, branch) from the environment or pyproject.toml."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["trainclinic"]
    return os.environ.get("REPO") or conf["repository"], os.environ.get("BRANCH") or conf["branch"]


def stamp(lesson, repo, branch):
    """Write the badge URL and the setup cell's install URL into the lesson's source notebook."""
    path = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        new = BADGE.sub(badge(lesson, repo, branch).replace("\\", "\\\\"), src)
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup":
            new = INSTALL.sub(f'"git+{repo}@{branch}"', new)
        cell["source"] = new
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if text != path.read_text():
        path.write_text(text)
        print(f"stamped {path.relative_to(ROOT)} with {repo}@{branch}")


def generate(lesson, release_dir="notebooks"):
    """nbgrader generate_assignment for one lesson into `release_dir` (no gradebook involved)."""
    cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", lesson, "--force", "--no-db", "--log-level=WARN",
           f"--CourseDirectory.release_directory={release_dir}"]
    subprocess.run(cmd, cwd=ROOT / "autograder", check=True)


def main(argv=None):
    """Stamp and generate every lesson, or --check that notebooks/ is up to date."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="compare a fresh release with notebooks/; change nothing")
    args.add_argument("only", nargs="*", help="lesson folders or numbers (default: every lesson)")
    opts = args.parse_args(argv)
    chosen = [l for l in lessons() if not opts.only or any(l == o or l.split("_")[0] == o for o in opts.only)]
    if not chosen:
        args.error(f"no lesson matches {' '.join(opts.only)}")
    if not opts.check:
        repo, branch = settings()
        for lesson in chosen:
            stamp(lesson, repo, branch)
            generate(lesson)
            print(f"released notebooks/{lesson}/{lesson}.ipynb")
        return 0
    with tempfile.TemporaryDirectory(dir=ROOT / "autograder") as tmp:
        drift = []
        for lesson in chosen:
            generate(lesson, release_dir=tmp)
            fresh, committed = Path(tmp) / lesson / f"{lesson}.ipynb", ROOT / "notebooks" / lesson / f"{lesson}.ipynb"
            if not committed.exists() or not filecmp.cmp(fresh, committed, shallow=False):
                drift.append(str(committed.relative_to(ROOT)))
    if drift:
        print("notebooks/ differs from what `make release` generates: " + ", ".join(drift))
        return 1
    print(f"notebooks/ is up to date ({len(chosen)} lessons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
