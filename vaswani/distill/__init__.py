"""`vaswani distill`: sequence-level knowledge distillation (Kim & Rush 2016), from a teacher's translations of the
training data to a small student's CTranslate2 export (docs/distillation.md).

folder.py (the output folder: its names, and which runs may write into it), teachers.py (the teacher: its folders,
language pair, CTranslate2 export and translator), distilled.py (the teacher's translations in chunks written
atomically, and the student's training file built from them: filtering, mixing the original pairs back in, their
statistics), report.py (teacher and student decoding the test file: BLEU, chrF, speed, parameters; distill_report.json)
and stages.py (the three stages, translate, train and export, each resuming what a killed run left).
"""
