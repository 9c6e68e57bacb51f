"""A trained model as a Hugging Face Hub folder: what it holds, and the card that describes it.

``python -m zoo export`` (:mod:`zoo.export`) and every task's ``save_pretrained``
(:mod:`zoo.tasks.hub`) write, and ``zoo.from_pretrained`` reads, this folder::

    config.json         the registered model name, task, architecture and every hyperparameter (config)
    model.safetensors   the weights, and nothing else (weights)
    codec.json          a text model's codec: kind, version, lengths, class names (codec_files)
    tokenizer.json      the codec's tokenizer, the BPE or the word vocabulary, as tokenizers JSON
    README.md           the model card: data, metrics, command, recipe, seed, versions (card)

One module per part: :mod:`~zoo.sharing.config`, :mod:`~zoo.sharing.weights`,
:mod:`~zoo.sharing.codec_files` and :mod:`~zoo.sharing.card` write and read the files,
:mod:`~zoo.sharing.staging` writes the folder at once, and the card is written from
:mod:`~zoo.sharing.runs` (the checkpoint and its run directory), :mod:`~zoo.sharing.metrics`
(the logged metrics) and :mod:`~zoo.sharing.data_sources` (each corpus's split and licence).
Nothing here imports the tasks, which import it.
"""
