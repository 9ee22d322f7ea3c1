"""Sample submissions for testing and benchmarking the grader: what a real class sends in.

    python -m autograder.corpus OUT [--lesson 01_device_mismatch]     # hostile corpus + expected.json
    python -m autograder.corpus OUT --class 40                        # 40 students x every lesson

The hostile corpus is built on one lesson (any: it uses the lesson's release notebook, its reference
answers and its variants from tests/variants/<slug>.py) and mixes every submission shape: nbgrader's
layout, folders per student, loose files named per student, zips. OUT/expected.json holds, per student,
the lesson, the points each check must get, the status and substrings the reasons must contain.
"""
import argparse
import copy
import importlib.util
import json
import re
import zipfile
from pathlib import Path

import nbformat

from autograder.lessons import lessons as all_lessons, release_nb, source_nb, variants_file

REPO = Path(__file__).resolve().parent.parent

__all__ = ["build", "build_class", "reference", "blank", "escape"]


def _load(path):
    return json.loads(Path(path).read_text())


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _src(cell):
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def blank(lesson):
    """The release notebook, as handed out."""
    return _load(release_nb(lesson))


def reference(lesson, answers=None):
    """The release notebook with the reference answers (or `answers`: {grade_id: source}) filled in."""
    src = {_gid(c): _src(c) for c in _load(source_nb(lesson))["cells"] if _meta(c).get("solution")}
    src.update(answers or {})
    nb = blank(lesson)
    for cell in nb["cells"]:
        if _gid(cell) in src and _meta(cell).get("solution"):
            text = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", "", src[_gid(cell)])
            cell["source"] = text
    return nb


def _variants(lesson):
    path = variants_file(lesson)
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"_variants_{lesson}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.VARIANTS


def _code(source):
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def _insert_after_answers(nb, *sources):
    """Insert plain code cells right after the last answer cell (before the tests)."""
    last = max(i for i, c in enumerate(nb["cells"]) if _meta(c).get("solution"))
    for k, s in enumerate(sources):
        nb["cells"].insert(last + 1 + k, _code(s))
    return nb


def _tests(nb):
    return {_gid(c): float(_meta(c)["points"]) for c in nb["cells"] if _meta(c).get("grade") and not _meta(c).get("solution")}


def _last_fn(nb):
    """The last function the learner writes (the answer cells' last `def`)."""
    names = [m for c in nb["cells"] if _meta(c).get("solution") for m in re.findall(r"^def (\w+)\(", _src(c), re.M)]
    return names[-1]


def _users(nb, fn):
    """Test cells that call `fn`."""
    return {_gid(c) for c in nb["cells"] if _gid(c) in _tests(nb) and re.search(rf"\b{fn}\b", _src(c))}


def _check_modules(nb):
    return sorted({m for c in nb["cells"] for m in re.findall(r"from trainclinic\.checks import (\w+)", _src(c))})


def _case(files, lesson, scores, status="graded", reasons=(), absent=(), outputs_not=()):
    return {"files": files, "lesson": lesson, "scores": scores, "status": status, "reasons": list(reasons),
            "absent": list(absent), "outputs_not": list(outputs_not)}


WRONG_CASES = 2


def cases(lesson):
    """{student: case}: every hostile or odd submission, with the grade it must get and why."""
    ref, bl = reference(lesson), blank(lesson)
    full = _tests(ref)
    zero = {g: 0.0 for g in full}
    fn = _last_fn(ref)
    users = _users(ref, fn)
    minus_fn = {g: (0.0 if g in users else p) for g, p in full.items()}
    mods = _check_modules(ref)
    imports = "\n".join(f"import trainclinic.checks.{m}" for m in mods)
    mod_list = "[" + ", ".join(f"trainclinic.checks.{m}" for m in mods) + "]"
    dumps = lambda nb: json.dumps(nb, indent=1).encode()
    name = f"{lesson}.ipynb"
    out = {}
    out["correct"] = _case({f"submitted/correct/{lesson}/{name}": dumps(ref)}, lesson, full)
    out["blank"] = _case({f"blank_{name}": dumps(bl)}, lesson, zero)
    # a few typical wrong fixes, the first ones the lesson's variants name: every variant's grade is proven by
    # the lesson's own tests (tests/test_runtimes.py, tests/test_grading.py); here they stand for a class's work
    wrong = [(v, spec) for v, spec in _variants(lesson).items() if spec["lost"]][:WRONG_CASES]
    for vname, spec in wrong:
        nb = reference(lesson, spec["cells"])
        scores = {g: (0.0 if g in spec["lost"] else p) for g, p in full.items()}
        vname = vname.replace("_", "-")
        out[f"wrong-{vname}"] = _case({f"wrong-{vname}_{lesson}.zip": {f"{lesson}/{name}": dumps(nb)}}, lesson, scores)
    out["loops"] = _case({f"loops/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), "while True:\n    pass"))},
                         lesson, full, reasons=["CellTimeoutError"])
    sleeper = f"import time\ndef {fn}(*args, **kwargs):\n    time.sleep(10**6)"
    out["sleeps"] = _case({f"sleeps/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), sleeper))},
                          lesson, minus_fn, reasons=["CellTimeoutError"])
    out["exits"] = _case({f"exits/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), "import os\nos._exit(1)"))},
                         lesson, full, reasons=["KernelDied"])
    crash = f"import ctypes\ndef {fn}(*args, **kwargs):\n    ctypes.string_at(0)   # segfault: the kernel dies"
    out["crashes"] = _case({f"crashes/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), crash))},
                           lesson, minus_fn, reasons=["KernelDied"])
    hog = "import torch\nhog = torch.ones(6 * 2**30, dtype=torch.uint8)   # 6 GB, past the cap"
    out["hogs-memory"] = _case({f"hogs-memory/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), hog))},
                               lesson, full, reasons=["out of memory"])
    spam = "for i in range(100_000):\n    print(f'{i:08d} ' + 'spam ' * 40)   # ~20 MB"
    out["spams"] = _case({f"spams/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), spam))},
                         lesson, full, reasons=["output truncated"])
    noisy = (f"import sys, torch\n_real_{fn} = {fn}\ndef {fn}(*args, **kwargs):\n"
             f"    print('debug: {fn} called', file=sys.stderr)\n"
             f"    torch.tensor(torch.zeros(2))   # PyTorch's own UserWarning (copy-construct from a tensor)\n"
             f"    return _real_{fn}(*args, **kwargs)")
    out["stderr"] = _case({f"stderr/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), noisy))}, lesson, full)
    out["malformed"] = _case({f"malformed_{name}": dumps(ref)[: len(dumps(ref)) // 2]}, lesson, zero, status="failed",
                             reasons=["malformed notebook"])
    v3 = nbformat.writes(nbformat.convert(nbformat.reads(json.dumps(ref), as_version=4), 3), version=3)
    out["old-format"] = _case({f"old-format/{name}": v3.encode()}, lesson, full, reasons=["nbformat 3"])
    nb = copy.deepcopy(ref)
    nb["cells"] = [c for c in nb["cells"] if _gid(c) not in full]
    out["deletes-tests"] = _case({f"deletes-tests/{name}": dumps(nb)}, lesson, full, reasons=["test cells deleted"])
    nb = copy.deepcopy(bl)
    for c in nb["cells"]:
        if _gid(c) in full:
            c["source"] = f'print("✓ {_gid(c)}: all good")'
        elif _gid(c) == "setup":
            c["source"] = _src(c) + "\nprint('edited setup')"
    out["edits-tests"] = _case({f"edits-tests/{name}": dumps(nb)}, lesson, zero, reasons=["cells edited"])
    nb = copy.deepcopy(ref)
    dup = []
    for c in nb["cells"]:
        dup.append(c)
        if _meta(c).get("solution") or _gid(c) == sorted(full)[0]:
            dup.append(copy.deepcopy(c))
    nb["cells"] = dup
    out["duplicates"] = _case({f"duplicates/{name}": dumps(nb)}, lesson, full, reasons=["duplicate grade ids"])
    out["renamed"] = _case({"renamed/homework final v2.ipynb": dumps(ref)}, lesson, full, reasons=["recognised by its cells"])
    out["colab"] = _case({f"colab/Copy of {name}": dumps(bl), f"colab/{lesson} (1).ipynb": dumps(ref)}, lesson, full,
                         reasons=["2 files"])
    patch = (f"{imports}\nimport trainclinic.checks\nfor _m in {mod_list}:\n    for _n in dir(_m):\n"
             f"        if _n.startswith('check_'):\n            setattr(_m, _n, lambda *a, **k: print('✓ passed'))")
    out["patches-checks"] = _case({f"patches-checks/{name}": dumps(_insert_after_answers(copy.deepcopy(bl), patch))},
                                  lesson, zero, reasons=["changed"])
    fake = (f"{imports}\nimport trainclinic.checks as _c\nclass CheckFailed(Exception):\n    pass\n"
            f"_c.CheckFailed = CheckFailed\nfor _m in {mod_list}:\n    _m.CheckFailed = CheckFailed\n"
            f"    _m.expect = lambda *a, **k: None\n    _m.call = lambda fn, *a, **k: None")
    out["fakes-checkfailed"] = _case({f"fakes-checkfailed/{name}": dumps(_insert_after_answers(copy.deepcopy(bl), fake))},
                                     lesson, zero, reasons=["changed"])
    sneaky = (f"def {fn}(*args, **kwargs):\n    import sys\n    for _n, _m in list(sys.modules.items()):\n"
              f"        if _n.startswith('trainclinic.checks'):\n"
              f"            for _a in ('expect', 'call', 'close'):\n"
              f"                if hasattr(_m, _a):\n                    setattr(_m, _a, lambda *a, **k: True)\n    return None")
    # A lesson whose checks run the learner's function only in other processes (lesson 11's ranks, forked): the patch
    # happens there, never in the kernel the guard watches, so it cannot help; the grade is still checked.
    elsewhere = any(getattr(importlib.import_module(f"trainclinic.checks.{m}"), "LEARNER_CODE_IN_OTHER_PROCESSES", False)
                    for m in mods)
    out["patches-during-check"] = _case({f"patches-during-check/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), sneaky))},
                                        lesson, minus_fn, reasons=[] if elsewhere else ["no seal"])
    off = ("ip = get_ipython()\nfor _e in ('pre_run_cell', 'post_run_cell'):\n    ip.events.callbacks[_e].clear()\n" + patch)
    out["disables-guard"] = _case({f"disables-guard/{name}": dumps(_insert_after_answers(copy.deepcopy(bl), off))},
                                  lesson, zero, reasons=["seal is missing"])
    marker = "tc-corpus-escape"
    solution = str(REPO / "solutions" / lesson / name)
    reads = [repr(solution), repr(str(REPO / ".grading" / "gradebook.db")), "'../../../../gradebook.db'",
             "'../../../../../' + os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname("
             "os.getcwd()))))) + '.db'"]
    writes = [str(REPO / "src" / "trainclinic" / (marker + ".py")), str(REPO / (marker + ".txt")), f"/tmp/{marker}.txt",
              f"../../../../../{marker}.txt"]
    snoop = escape(reads, writes, unmount=(str(REPO / "solutions"), solution)) + (
        "for d in ['../../..', '../../../..', '/tmp']:\n"
        "    try:\n        print('LISTED', d, sorted(os.listdir(d))[:20])\n"
        "    except Exception as e:\n        print('blocked list', d, type(e).__name__)\n")
    out["snoops"] = _case({f"snoops/{name}": dumps(_insert_after_answers(copy.deepcopy(ref), snoop))}, lesson, full,
                          absent=[str(REPO / "src" / "trainclinic" / (marker + ".py")), str(REPO / (marker + ".txt")),
                                  f"/tmp/{marker}.txt", f"/tmp/{marker}.txt"],
                          outputs_not=["READ ", "CONNECTED", "REMOUNTED", "UNMOUNTED"])
    return out


ESCAPE = """import ctypes, os, socket
print('INTERFACES', sorted(name for _, name in socket.if_nameindex()))
print('CAPS', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')])
for p in [{reads}]:
    try:
        print('READ', p, len(open(p, 'rb').read()))
    except Exception as e:
        print('blocked read', p, type(e).__name__)
for host, port in [('1.1.1.1', 53), ('pypi.org', 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print('CONNECTED', host)
    except Exception as e:
        print('blocked net', host, type(e).__name__)
for p in {writes!r}:
    try:
        open(p, 'w').write('x')
        print('WROTE', p)
    except Exception as e:
        print('blocked write', p, type(e).__name__)
libc = ctypes.CDLL(None, use_errno=True)
print('REMOUNTED /' if libc.mount(None, b'/', None, 32 | 4096, None) == 0 else 'blocked remount')
"""
UNMOUNT = """print('UNMOUNTED' if libc.umount2({folder!r}.encode(), 2) == 0 else 'blocked umount')
print('READ after umount' if os.path.exists({inside!r}) else 'blocked read after umount')
"""


def escape(reads, writes, unmount=None):
    """Learner code that tries to leave the sandbox, printing READ / CONNECTED / WROTE / REMOUNTED / UNMOUNTED on
    success and `blocked ...` otherwise, plus its network interfaces and capabilities. `reads`: Python expressions
    (a path may be computed in the kernel); `writes`: paths; `unmount`: (folder, a file inside it) or None."""
    code = ESCAPE.format(reads=", ".join(reads), writes=list(writes))
    return code + (UNMOUNT.format(folder=unmount[0], inside=unmount[1]) if unmount else "")


def _write(root, files):
    for rel, data in files.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, dict):  # a zip: {member: bytes}
            with zipfile.ZipFile(path, "w") as z:
                for member, blob in data.items():
                    z.writestr(member, blob)
        else:
            path.write_bytes(data)


def build(out, lesson=None, only=None):
    """Write the hostile corpus for `lesson` into `out`; return the expectations {student: case-without-files}."""
    lesson = lesson or all_lessons()[0]
    expected = {}
    for student, case in cases(lesson).items():
        if only and student not in only:
            continue
        _write(out, case.pop("files"))
        expected[student] = case
    return expected


def build_class(out, students=40, lessons=None):
    """A well-behaved class in nbgrader's layout: students x lessons, a mix of reference, blank and variants."""
    lessons = lessons or all_lessons()
    for lesson in lessons:
        kinds = [("reference", reference(lesson)), ("blank", blank(lesson))]
        kinds += [(v, reference(lesson, s["cells"])) for v, s in _variants(lesson).items()]
        for i in range(students):
            _, nb = kinds[i % len(kinds)]
            _write(out, {f"submitted/s{i:03d}/{lesson}/{lesson}.ipynb": json.dumps(nb).encode()})
    return lessons


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m autograder.corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--lesson")
    p.add_argument("--class", dest="students", type=int, help="write a class of N students x every lesson instead")
    p.add_argument("--expected", help="write the expected grades and reasons (JSON) here")
    a = p.parse_args(argv)
    if a.students:
        build_class(a.out, a.students)
    else:
        expected = build(a.out, a.lesson)
        if a.expected:
            Path(a.expected).write_text(json.dumps(expected, indent=1))
        print(" ".join(expected))


if __name__ == "__main__":
    main()
