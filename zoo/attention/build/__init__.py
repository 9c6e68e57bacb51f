"""Naming and building: the registry of both kinds (:mod:`.factory`), a layer's whole attention
choice (:mod:`.spec`), and which kernels run a call (:mod:`.backends`)."""
