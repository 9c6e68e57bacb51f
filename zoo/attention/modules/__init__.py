"""The shared pieces and family bases the variants are made of: the multi-head layers
(:mod:`.headed`, :mod:`.multi_head`), the scaled dot-product path, rotary tables, gates and norms,
short convolutions, the recurrent layers' base (:mod:`.recurrent`) and their recurrences
(:mod:`.recurrence`), block selection, and FlexAttention's variant base."""
