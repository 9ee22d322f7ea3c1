"""Scaffold a new lesson that passes `make test-lesson` at once: python tools/new_lesson.py 07 mixed_precision "Title".

Writes, for lesson NN_slug (see docs/lesson-template.md):
    solutions/NN_slug/NN_slug.py     the text source: badge, locked setup, the template's sections, one repro cell,
                                     one exercise with its solution, one graded check with hidden tests, explore,
                                     troubleshooting and recap
    src/trainclinic/checks/slug.py   its checks module, one check
    tests/variants/slug.py           one wrong fix and one correct fix written differently
    README.md                        the lesson's row in the lessons table
then generates solutions/NN_slug/NN_slug.ipynb and notebooks/NN_slug/NN_slug.ipynb (tools/release.py).
Refuses to overwrite anything that exists.
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
from autograder.lessons import NAME, checks_module, text_source, variants_file  # noqa: E402
from nbcells import badge, setup_source  # noqa: E402

__all__ = ["scaffold", "main"]

MD = '{{"grade": false, "grade_id": "{gid}", "locked": true, "schema_version": 3, "solution": false, "task": false}}'
SOLUTION = '{{"grade": false, "grade_id": "{gid}", "locked": false, "schema_version": 3, "solution": true, "task": false}}'
TEST = ('{{"grade": true, "grade_id": "{gid}", "locked": true, "points": {points}, "schema_version": 3, "solution": false, '
        '"task": false}}')
SETUP = '{"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}'


def _md(text, gid=None):
    head = f"# %% [markdown] nbgrader={MD.format(gid=gid)}" if gid else "# %% [markdown]"
    return head + "\n" + "\n".join(("# " + line).rstrip() for line in text.strip("\n").split("\n")) + "\n"


def _code(text, head="# %%"):
    return head + "\n" + text.strip("\n") + "\n"


def source(lesson, title, repo, branch):
    """The text source of a new lesson (jupytext percent format)."""
    num, slug = NAME.match(lesson).groups()
    cells = [
        _md(f"""# Lesson {num} · {title}

{badge(lesson, repo, branch)}

**The failure:** `RuntimeError: mat1 and mat2 shapes cannot be multiplied` (replace with this lesson's failure).

**What you will learn**
- to reproduce the failure and read PyTorch's message;
- to diagnose it with a tool;
- to write the fix, checked automatically.

**Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`).""", "intro"),
        _code(setup_source(repo, branch), f"# %% nbgrader={SETUP}"),
        _md("""## 1 · Reproduce the failure

Real PyTorch code raising PyTorch's own exception (on a CPU-only machine, say what is simulated).""", "reproduce_md"),
        _code("""x = torch.randn(4, 3)
layer = torch.nn.Linear(5, 2)
layer(x)""", '# %% tags=["raises-exception"]'),
        _md("""### How to read the message

The two shapes in the message: the first is the input (4 samples x 3 features), the second the layer's weight,
transposed (5 inputs x 2 outputs). They must agree on the inner dimension."""),
        _md("""## 2 · Diagnose

Look at what reaches the layer."""),
        _code("""print("input:", tuple(x.shape), "| the layer expects", layer.in_features, "features")"""),
        _md("""## 3 · Fix it

Write `fit_features(x, n)`: return `x` with exactly `n` features (columns), keeping its rows, dtype and device:
cut the extra columns, or pad with zeros on the right.""", "fix_md"),
        _code("""def fit_features(x, n):
    \"\"\"x (N, F) -> (N, n): the first n columns, zero-padded on the right when F < n.\"\"\"
    ### BEGIN SOLUTION
    if x.shape[1] >= n:
        return x[:, :n]
    return torch.nn.functional.pad(x, (0, n - x.shape[1]))
    ### END SOLUTION""", f"# %% nbgrader={SOLUTION.format(gid='fit_features')}"),
        _code("""print(layer(fit_features(x, layer.in_features)).shape)"""),
        _md("""## 4 · Check

Each cell below calls a check on your function with seeded inputs. It prints `✓ ...` when your code behaves, and
otherwise raises `CheckFailed` saying what was expected, what happened and a hint. The grader runs more cases
(other seeds and sizes) than you see here.""", "check_md"),
        _code(f'''"""fit_features keeps rows, dtype and device, and gives exactly n columns"""
from trainclinic.checks import {slug} as checks
checks.check_fit_features(fit_features)
### BEGIN HIDDEN TESTS
checks.check_fit_features(fit_features, seed=1)
checks.check_fit_features(fit_features, seed=2)
### END HIDDEN TESTS''', f"# %% nbgrader={TEST.format(gid='check_fit_features', points=1)}"),
        _md("""## 5 · Explore

Move the sliders; "show the failure" puts the bug back."""),
        _code("""def run(features=3, fixed=True):
    \"\"\"A few SGD steps of a Linear(5, 1) on inputs with `features` columns, fitted or not.\"\"\"
    torch.manual_seed(0)
    model, xs = torch.nn.Linear(5, 1), torch.randn(32, features)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = {"step": [], "loss": [], "grad_norm": []}
    for step in range(10):
        inputs = fit_features(xs, 5) if fixed else xs
        loss = model(inputs).pow(2).mean()   # raises PyTorch's shape error when not fitted
        opt.zero_grad()
        loss.backward()
        history["step"].append(step)
        history["loss"].append(loss.item())
        history["grad_norm"].append(tc.grad_norm(model))
        opt.step()
    return history


tc.explore(run, title="fit_features", failure={"fixed": False}, features=("int", 1, 8, 3), fixed=("bool", True));"""),
        _md("""## 6 · Troubleshooting

| Symptom | Cause | Fix |
|---|---|---|
| a shape error at the first layer | the data has another number of features than the layer | fit the data, or size the layer for it |

**Recap.** Read the two shapes in the message, find which tensor is the odd one, and fix it where it is made.""", "recap"),
    ]
    return ("# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3 (ipykernel)\n#     language: python\n"
            "#     name: python3\n# ---\n\n" + "\n".join(cells))


def checks_source(lesson, title):
    """The lesson's checks module: one check, in the house style (docs/lesson-template.md)."""
    return f'''"""Checks for lesson {lesson} ({title}). Each is a function of the learner's objects; `seed` drives a sweep."""
import random

import torch

from . import call, check, devices, expect, same_device

__all__ = ["check_fit_features"]


def _case(seed):
    """(rows, features, n, dtype) for a seed: seed 0 is the notebook's visible case."""
    rng = random.Random(seed)
    if seed == 0:
        return 4, 3, 5, torch.float32
    return rng.choice([1, 2, 7]), rng.choice([1, 4, 9]), rng.choice([2, 5, 6]), rng.choice([torch.float32, torch.float64])


@check("fit_features")
def check_fit_features(fit_features, seed=0):
    """fit_features(x, n) -> (N, n): x's first n columns, zero-padded; same dtype and device."""
    rows, features, n, dtype = _case(seed)
    for device in devices():
        x = torch.randn(rows, features, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)
        want = torch.zeros(rows, n, dtype=dtype, device=device)
        want[:, :min(n, features)] = x[:, :min(n, features)]
        got = call(fit_features, x.clone(), n, name="fit_features")
        expect(torch.is_tensor(got), "fit_features's return value", "a tensor", type(got).__name__)
        expect(tuple(got.shape) == (rows, n), f"the shape for x of shape {{tuple(x.shape)}} and n={{n}}",
               (rows, n), tuple(got.shape), "keep every row; give exactly n columns")
        expect(got.dtype == dtype and same_device(got, device), "dtype and device", f"{{dtype}} on {{device}}",
               f"{{got.dtype}} on {{got.device}}")
        expect(torch.equal(got, want), f"the values for n={{n}} and {{features}} features",
               "x's first columns, then zeros", "other values", "cut with x[:, :n]; pad zeros on the right")
    return f"shape, values, dtype and device right ({{rows}}x{{features}} to n={{n}}, {{str(dtype)[6:]}})"
'''


def variants_source(lesson):
    """The lesson's variants: one wrong fix, one correct fix written differently."""
    return f'''"""Lesson {lesson}: wrong fixes (each loses exactly its checks, with the message) and correct ones written differently.

Format: tests/variants/__init__.py."""

VARIANTS = {{
    "pads_on_the_left": {{
        "cells": {{"fit_features": """def fit_features(x, n):
    if x.shape[1] >= n:
        return x[:, :n]
    return torch.nn.functional.pad(x, (n - x.shape[1], 0))
"""}},
        "lost": {{"check_fit_features": "x's first columns, then zeros"}},
    }},
    "correct_with_cat": {{
        "cells": {{"fit_features": """def fit_features(x, n):
    extra = torch.zeros(x.shape[0], max(0, n - x.shape[1]), dtype=x.dtype, device=x.device)
    return torch.cat([x, extra], dim=1)[:, :n]
"""}},
        "lost": {{}},
    }},
}}
'''


def readme_row(lesson, title):
    """The README lessons-table row."""
    return f"| {NAME.match(lesson).group(1)} | [{title}](notebooks/{lesson}/{lesson}.ipynb) | (the failure, in a line) |"


def scaffold(number, slug, title, root=ROOT):
    """Write the lesson's files (never overwriting); return the lesson's folder name."""
    import release

    lesson = f"{int(number):02d}_{slug}"
    if not NAME.match(lesson):
        raise ValueError(f"{slug!r}: a slug is lower_case_with_underscores")
    paths = {text_source(lesson, root): source(lesson, title, *release.settings()),
             root / "src" / "trainclinic" / "checks" / f"{slug}.py": checks_source(lesson, title),
             variants_file(lesson, root): variants_source(lesson)}
    taken = [str(p.relative_to(root)) for p in paths if p.exists()]
    if taken or any(p.name.startswith(f"{int(number):02d}_") for p in (root / "solutions").iterdir()):
        raise FileExistsError(f"lesson {number} exists already: {', '.join(taken) or 'solutions/' + lesson}")
    for path, text in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(root)}")
    readme = root / "README.md"
    text = readme.read_text()
    rows = list(re.finditer(r"^\| \d\d \| \[.*$", text, re.M))
    row = readme_row(lesson, title)
    at = rows[-1].end() if rows else len(text)
    readme.write_text(text[:at] + "\n" + row + text[at:])
    print(f"added the lesson's row to README.md ({checks_module(lesson)}, {variants_file(lesson, root).relative_to(root)})")
    return lesson


def main(argv=None):
    """Scaffold a lesson, then generate its notebooks."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("number", help="two digits, e.g. 07")
    p.add_argument("slug", help="lower_case_with_underscores, e.g. mixed_precision")
    p.add_argument("title", help='e.g. "Mixed precision"')
    a = p.parse_args(argv)
    try:
        lesson = scaffold(a.number, a.slug, a.title)
    except (ValueError, FileExistsError) as e:
        p.error(str(e))
    import release

    release.main([lesson])
    print(f"next: make test-lesson L={lesson[:2]}   (docs/lesson-template.md says what each part must do)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
