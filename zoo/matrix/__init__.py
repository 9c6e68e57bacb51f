"""The zoo's verdict as data: every family (row) on every yardstick (column), one resumable command.

:mod:`~zoo.matrix.protocol` reads a yardstick's checked-in protocol, :mod:`~zoo.matrix.rows`
chooses the rows, :mod:`~zoo.matrix.plan` groups them into the comparisons that run them, and
:mod:`~zoo.matrix.cli` is ``python -m zoo matrix``.
"""
