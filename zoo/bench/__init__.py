"""``python -m zoo bench``: how fast and how big the zoo's attention, training and decoding are.

* ``attention``: forward+backward time and peak memory of every registered scoring attention
  and of ``multi_head``, against reference formulations (:mod:`zoo.bench.baselines`), over a
  grid of sequence lengths, with each case's growth exponent.
* ``train``: training throughput (non-padding target tokens per second) through the Lightning
  trainer on fra-eng.
* ``decode``: greedy (or beam) decoding throughput, with and without the decoder's cache.
* ``state``: the time and the cache's bytes of one decoded token after a long context, for one
  layer per attention, or a recipe's whole stack (:mod:`zoo.bench.recipe_stack`).
* ``classify``: the classifier's training step per attention over lengths (the LRA's Table 2).

These are benchmarks, not tests: they measure and report, they assert nothing. Each prints a
table and writes JSON with the machine, the versions and the command that produced it
(:mod:`zoo.bench.report`); timing and memory are measured as :mod:`zoo.bench.measure` says.
"""
