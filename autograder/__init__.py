"""Instructor tooling around nbgrader: bulk grading (`python -m autograder.grade`), sample submissions."""
