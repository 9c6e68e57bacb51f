"""The contract every variant is written against: the two kinds (:mod:`.base`, scoring attentions
run per head; :mod:`.layer`, layers that own their projections), the context a model builds once a
forward (:mod:`.context`), masks (:mod:`.masking`) and decoding caches (:mod:`.cache`)."""
