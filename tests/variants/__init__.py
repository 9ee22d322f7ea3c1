"""Submissions to grade, per lesson: wrong fixes and differently written correct fixes.

Each lesson module defines VARIANTS: {name: {"cells": {answer grade_id: source}, "lost": {test grade_id:
substring of the message that cell must show}}}. A variant is the reference solution notebook with those
answer cells replaced; every test cell not named in "lost" must keep full marks. "reference" (the solution
itself) and "blank" (the release notebook) are added for every lesson by the tests.
"""
