"""Generate the lesson notebooks from their text sources: solutions/*.ipynb (jupytext), then notebooks/ (nbgrader).

    python tools/release.py                 # stamp, then generate every lesson's source and release notebook
    python tools/release.py --check         # generate into a temp dir; exit 1 if anything committed differs
    python tools/release.py 01 04           # only these lessons (folder names, numbers or slugs)
    python tools/release.py --from-ipynb 05 # after editing solutions/05_*/05_*.ipynb in JupyterLab: write it
                                            # back into the text source (then run the plain command)
    REPO=https://github.com/you/course BRANCH=main python tools/release.py

A lesson's text source, solutions/NN_slug/NN_slug.py, is the one file a person edits: jupytext's percent
format, each cell's nbgrader metadata and tags in its `# %%` line. The .ipynb files are generated, committed
(nbgrader and instructors need them) and checked for drift by the tests.

The repository URL (for the Colab badge and the setup cell's pip install) comes from REPO / BRANCH,
else from [tool.trainclinic] in pyproject.toml: one setting, stamped everywhere.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
from autograder.lessons import find, lessons, release_nb, source_nb, text_source  # noqa: E402
from nbcells import badge  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

__all__ = ["settings", "stamp", "notebook", "to_text", "build", "generate", "main"]

BADGE = re.compile(r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]\([^)]*\)")
INSTALL = re.compile(r'"git\+[^"@]+(?:@[^"]*)?"')
KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def settings():
    """(repository URL, branch) from the environment or pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    conf = tomllib.loads(text)["tool"]["trainclinic"] if tomllib else {
        k: re.search(rf'^{k}\s*=\s*"([^"]*)"', text, re.M).group(1) for k in ("repository", "branch")}
    return os.environ.get("REPO") or conf["repository"], os.environ.get("BRANCH") or conf["branch"]


def stamp(lesson, repo, branch):
    """Write the badge URL and the setup cell's install URL into the lesson's text source."""
    path = text_source(lesson)
    old = path.read_text()
    new = BADGE.sub(badge(lesson, repo, branch).replace("\\", "\\\\"), old)
    setup = re.search(r'^# %% nbgrader=\{[^\n]*"grade_id": "setup"[^\n]*\n(.*?)(?=^# %%|\Z)', new, re.M | re.S)
    if setup:
        new = new[:setup.start(1)] + INSTALL.sub(f'"git+{repo}@{branch}"', setup.group(1)) + new[setup.end(1):]
    if new != old:
        path.write_text(new)
        print(f"stamped {path.relative_to(ROOT)} with {repo}@{branch}")


def notebook(path):
    """The nbgrader source notebook a text source describes (outputs empty, no cell ids, nbformat 4.4)."""
    import jupytext
    import nbformat

    nb = jupytext.read(path, fmt="py:percent")
    nb.metadata = nbformat.from_dict({"kernelspec": nb.metadata.get("kernelspec", KERNEL),
                                      "language_info": {"name": "python"}})
    nb.nbformat, nb.nbformat_minor = 4, 4  # nbgrader strips cell ids; 4.4 has none
    for cell in nb.cells:
        cell.pop("id", None)
    return nb


def to_text(nb):
    """A notebook as the text source: jupytext percent format, the kernelspec its only notebook metadata."""
    import jupytext

    nb = jupytext.reads(jupytext.writes(nb, fmt="ipynb"), fmt="ipynb")
    nb.metadata = {"kernelspec": nb.metadata.get("kernelspec", KERNEL),
                   "jupytext": {"notebook_metadata_filter": "kernelspec,-jupytext", "cell_metadata_filter": "all"}}
    return jupytext.writes(nb, fmt="py:percent")


def _notebook_text(nb):
    import nbformat

    return nbformat.writes(nb) + "\n"


def build(lesson, dest=None):
    """Write the lesson's source notebook from its text source (into `dest`, default solutions/); True if changed."""
    path = Path(dest) / lesson / f"{lesson}.ipynb" if dest else source_nb(lesson)
    text = _notebook_text(notebook(text_source(lesson)))
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def generate(lesson, release_dir="notebooks", source_dir="solutions"):
    """nbgrader generate_assignment for one lesson into `release_dir` (no gradebook involved)."""
    cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", lesson, "--force", "--no-db", "--log-level=WARN",
           f"--CourseDirectory.release_directory={release_dir}", f"--CourseDirectory.source_directory={source_dir}"]
    subprocess.run(cmd, cwd=ROOT / "autograder", check=True)


def _check(chosen):
    drift = []
    with tempfile.TemporaryDirectory(dir=ROOT / "autograder") as tmp:
        sources, released = Path(tmp) / "solutions", Path(tmp) / "notebooks"
        for lesson in chosen:
            build(lesson, sources)
            shutil.copy(text_source(lesson), sources / lesson)  # as in solutions/: the release must leave it out
            fresh = sources / lesson / f"{lesson}.ipynb"
            if not source_nb(lesson).exists() or fresh.read_text() != source_nb(lesson).read_text():
                drift.append(str(source_nb(lesson).relative_to(ROOT)))
            generate(lesson, release_dir=released, source_dir=sources)
            fresh, committed = released / lesson / f"{lesson}.ipynb", release_nb(lesson)
            if not committed.exists() or fresh.read_bytes() != committed.read_bytes():
                drift.append(str(committed.relative_to(ROOT)))
            extra = sorted(p.name for p in (released / lesson).iterdir() if p.name != fresh.name)
            if extra:
                drift.append(f"{lesson}: the release would also ship {', '.join(extra)}")
    return drift


def main(argv=None):
    """Stamp and generate every lesson, or --check that the generated notebooks are up to date."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="compare a fresh generation with the tree; change nothing")
    args.add_argument("--from-ipynb", action="store_true",
                      help="write each chosen lesson's source .ipynb back into its text source")
    args.add_argument("only", nargs="*", help="lesson folders, numbers or slugs (default: every lesson)")
    opts = args.parse_args(argv)
    try:
        chosen = sorted({find(o) for o in opts.only}) if opts.only else lessons()
    except LookupError as e:
        args.error(str(e))
    if opts.from_ipynb:
        import nbformat

        for lesson in chosen:
            text_source(lesson).write_text(to_text(nbformat.read(source_nb(lesson), as_version=4)))
            print(f"wrote {text_source(lesson).relative_to(ROOT)} from {source_nb(lesson).relative_to(ROOT)}")
        return 0
    if opts.check:
        drift = _check(chosen)
        if drift:
            print("not what `make release` generates from the text sources: " + "; ".join(drift))
            return 1
        print(f"solutions/*.ipynb and notebooks/ are up to date ({len(chosen)} lessons)")
        return 0
    repo, branch = settings()
    for lesson in chosen:
        stamp(lesson, repo, branch)
        if build(lesson):
            print(f"generated {source_nb(lesson).relative_to(ROOT)}")
        generate(lesson)
        print(f"released {release_nb(lesson).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
