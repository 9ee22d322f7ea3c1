"""nbgrader configuration for trainclinic.

Source notebooks live in solutions/, release notebooks in notebooks/. The gradebook and the student
folders (submitted/, autograded/, feedback/) live under .grading/ by default: never in the tracked tree.
Override with the environment: TRAINCLINIC_COURSE_ROOT (a class's grading folder) and
TRAINCLINIC_GRADEBOOK (an sqlite path).
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

repo = Path(__file__).resolve().parent.parent
root = Path(os.environ.get("TRAINCLINIC_COURSE_ROOT", repo))
gradebook = Path(os.environ.get("TRAINCLINIC_GRADEBOOK", repo / ".grading" / "gradebook.db"))
gradebook.parent.mkdir(parents=True, exist_ok=True)

c.CourseDirectory.root = str(root)
c.CourseDirectory.source_directory = "solutions"  # a class's grading folder links solutions/ and notebooks/
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = f"sqlite:///{gradebook}"
c.CourseDirectory.course_id = "trainclinic"
# A lesson's text source (solutions/NN_slug/NN_slug.py) holds the solutions: never copied into a release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "[0-9][0-9]_*.py"]

# Lessons are small: a cell that runs a minute is a broken submission, not a slow one.
c.ExecutePreprocessor.timeout = int(os.environ.get("TRAINCLINIC_CELL_TIMEOUT", 60))
c.ExecutePreprocessor.interrupt_on_timeout = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# Tracebacks in plain text: IPython's default (Context) mode parses every frame's source file with stack_data, and
# torch's files are long: 0.3-0.4 s per traceback, several seconds for a notebook whose checks fail.
c.ExecutePreprocessor.extra_arguments = ["--InteractiveShell.xmode=Plain"]
