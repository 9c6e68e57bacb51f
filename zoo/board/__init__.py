"""``python -m zoo board``: the zoo's results as a static leaderboard site.

It reads what ``zoo compare`` (records, one a run) and ``zoo bench`` (JSON results) wrote
(:mod:`zoo.board.inputs`), places each record on a row (its attention recipe) and a column (its
task, setting and metric: :mod:`zoo.board.recipes`, :mod:`zoo.board.results`), takes the newest
benchmark measurement of each case (:mod:`zoo.board.measurements`), lays out the table
(:mod:`zoo.board.leaderboard`) and the figures (:mod:`zoo.board.plots`), and writes the pages
(:mod:`zoo.board.site`: :func:`~zoo.board.site.build_site` from Python). Nothing here measures or
trains: every number comes from a record. The package imports nothing itself, so that the command
can say which of the ``board`` extra's libraries is missing before any of them is imported.
"""
