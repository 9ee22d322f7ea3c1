"""Turn a folder of submissions, in whatever shape a class sends them, into one notebook per student and lesson.

Accepted: nbgrader's layout (`submitted/<student>/<lesson>/<notebook>.ipynb`), a folder per student, LMS
zip downloads and loose files named per student (`alice_01_device_mismatch.ipynb`, `alice.zip`), Colab
downloads whose names changed ("Copy of 03_out_of_memory.ipynb", "03_out_of_memory (1).ipynb"), older
nbformat versions (upgraded), and notebooks renamed altogether (recognised by their cells' grade ids).
Archives are unpacked with nbgrader's own zip_collect extractor. Problems found on the way (malformed
JSON, deleted, edited or duplicated cells) are recorded as reasons, never silently dropped.
"""
import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

__all__ = ["Item", "collect", "lesson_cells", "STUDENT_REGEX"]

STUDENT_REGEX = r"^(?P<student_id>[^_\s]+)"
COPY = re.compile(r"^(copy of\s+)+", re.I)
DUP = re.compile(r"\s*[\(\[]\d+[\)\]]\s*$|\s*-\s*\d+$")


@dataclass
class Item:
    """One (student, lesson) to grade: the normalised notebook, or why it cannot be graded."""

    student: str
    lesson: str
    notebook: dict = None
    source: str = ""
    reasons: list = field(default_factory=list)
    failure: str = ""

    @property
    def key(self):
        return f"{self.student}--{self.lesson}"

    def digest(self):
        """Hash of what will be graded (resuming skips an unchanged, already graded submission)."""
        if self.notebook is None:
            payload = self.failure
        else:  # cell ids are random when nbformat upgrades an old notebook: leave them out
            cells = [{k: v for k, v in c.items() if k != "id"} for c in self.notebook["cells"]]
            payload = json.dumps({**self.notebook, "cells": cells}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _src(cell):
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def lesson_cells(release_dir, lessons):
    """{lesson: {grade_id: cell}} from the release notebooks."""
    out = {}
    for lesson in lessons:
        nb = json.loads((Path(release_dir) / lesson / f"{lesson}.ipynb").read_text())
        out[lesson] = {_gid(c): c for c in nb["cells"] if _gid(c)}
    return out


def _clean_name(stem):
    stem = COPY.sub("", stem.strip())
    prev = None
    while prev != stem:
        prev, stem = stem, DUP.sub("", stem).strip()
    return stem


def _copy_number(stem):
    m = re.search(r"[\(\[](\d+)[\)\]]\s*$", stem)
    return int(m.group(1)) if m else 0


def _lesson_by_name(name, lessons):
    clean = _clean_name(name).lower()
    for lesson in lessons:
        if lesson.lower() in clean:
            return lesson
    number = re.search(r"(?:^|[^0-9])(\d{2})[_ -]", clean + " ")
    if number:
        hits = [l for l in lessons if l.startswith(number.group(1) + "_")]
        if len(hits) == 1:
            return hits[0]
    return None


def _lesson_by_content(nb, known):
    """The lesson whose grade ids the notebook shares most (ids common to every lesson, like 'setup', do not count)."""
    ids = {_gid(c) for c in nb.get("cells", []) if _gid(c)}
    common = set.intersection(*known.values()) if len(known) > 1 else set()
    best = max(known, key=lambda l: len(ids & (known[l] - common)), default=None)
    return best if best and ids & (known[best] - common) else None


def _known_ids(solutions):
    """{lesson: grade ids} for every lesson in solutions/ (to recognise a notebook of any lesson)."""
    out = {}
    for p in sorted(Path(solutions).iterdir()):
        if (p / f"{p.name}.ipynb").exists():
            out[p.name] = {_gid(c) for c in json.loads((p / f"{p.name}.ipynb").read_text())["cells"] if _gid(c)}
    return out


def _student(rel, regex, archives=()):
    """A folder's name is the student id; a loose file's or an archive's name goes through `regex`."""
    if rel.parts[0] == "submitted" and len(rel.parts) > 2:  # nbgrader's layout inside the folder
        rel = Path(*rel.parts[1:])
    first = rel.parts[0]
    if len(rel.parts) == 1:
        first = Path(first).stem
    elif first not in archives:
        return first
    m = re.match(regex, first)
    return (m.group("student_id") if m else first).strip()


def _inspect(item, cells):
    """Reasons for the record: cells deleted, edited or duplicated. nbgrader restores deleted and edited ones;
    a duplicate keeps its code but loses its nbgrader metadata (the first copy keeps the grade id)."""
    seen, dups, edited = set(), [], []
    for cell in item.notebook["cells"]:
        gid = _gid(cell)
        if not gid:
            continue
        if gid in seen:
            dups.append(gid)
            del cell["metadata"]["nbgrader"]
            continue
        seen.add(gid)
        ref = cells.get(gid)
        meta = ref and ref["metadata"].get("nbgrader", {})
        if ref and (meta.get("locked") or (meta.get("grade") and not meta.get("solution"))) and _src(cell) != _src(ref):
            edited.append(gid)
    tests = [g for g, c in cells.items() if c["metadata"]["nbgrader"].get("grade")]
    missing = [g for g in cells if g not in seen]
    if missing:
        kind = "test cells" if set(missing) & set(tests) else "cells"
        item.reasons.append(f"{kind} deleted: {', '.join(missing)} (restored from the release)")
    if edited:
        item.reasons.append(f"locked/test cells edited: {', '.join(sorted(set(edited)))} (restored from the release)")
    if dups:
        item.reasons.append(f"duplicate grade ids: {', '.join(sorted(set(dups)))} (the first copy keeps the id)")


def collect(folder, lessons, release_dir, student_regex=STUDENT_REGEX, solutions=None):
    """(items, skipped): one Item per (student, lesson) found, and [(file, why)] for files not graded.
    Only `lessons` are collected; notebooks of other lessons are recognised and left out."""
    folder = Path(folder)
    cells = lesson_cells(release_dir, lessons)
    known = _known_ids(solutions) if solutions else {}
    known.update({l: set(c) for l, c in cells.items()})
    from nbgrader.plugins.zipcollect import ExtractorPlugin  # nbgrader's zip_collect unpacking

    tmp = Path(tempfile.mkdtemp(prefix="tc-intake-"))
    try:
        ExtractorPlugin(force=True).extract(str(folder), str(tmp))
        archives = {p.name.split(".")[0] for p in folder.iterdir() if p.suffix.lower() in (".zip", ".gz")}
        found, skipped = {}, []
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            rel = path.relative_to(tmp)
            if "__MACOSX" in rel.parts or any(p.startswith(".") for p in rel.parts):
                continue
            if path.suffix.lower() != ".ipynb":
                skipped.append((str(rel), "not a notebook"))
                continue
            student = _student(rel, student_regex, archives)
            by_name = _lesson_by_name(path.stem, lessons) or next(
                (l for l in lessons for part in rel.parts[:-1] if _lesson_by_name(part, lessons) == l), None)
            text = path.read_bytes().decode("utf-8", "replace")
            try:
                nb = nbformat.reads(text, as_version=4)
                version = json.loads(text).get("nbformat")
            except Exception as exc:  # malformed JSON, not a notebook at all
                if not by_name:
                    skipped.append((str(rel), f"unreadable and no lesson in its name: {str(exc)[:120]}"))
                    continue
                if by_name not in lessons:
                    continue
                item = Item(student, by_name, source=str(rel), failure=f"malformed notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
                found.setdefault(item.key, []).append((path, item))
                continue
            nb = json.loads(nbformat.writes(nb))
            lesson = _lesson_by_content(nb, known) or by_name
            if not lesson:
                skipped.append((str(rel), "no lesson matches its name or its cells"))
                continue
            if lesson not in lessons:
                continue  # another lesson, not selected for this run
            item = Item(student, lesson, notebook=nb, source=str(rel))
            if version and version < 4:
                item.reasons.append(f"nbformat {version} notebook upgraded to 4")
            if by_name != lesson:
                item.reasons.append(f"file '{path.name}' recognised by its cells and graded as {lesson}")
            _inspect(item, cells[lesson])
            found.setdefault(item.key, []).append((path, item))
        items = []
        for key, versions in found.items():
            # several files for one lesson (re-downloads): grade the newest readable one, say so
            versions.sort(key=lambda pi: (pi[1].failure == "", _copy_number(pi[0].stem), pi[0].name))
            path, item = versions[-1]
            if len(versions) > 1:
                item.reasons.append(f"{len(versions)} files for this lesson; graded '{path.name}'")
            items.append(item)
        return sorted(items, key=lambda i: (i.student, i.lesson)), skipped
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
