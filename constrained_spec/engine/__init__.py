"""The engine: the decode loop (``loop``), draft blocks (``block``), proposers behind one interface
(``proposers``), adaptive draft length (``draft_length``), stats and hooks (``stats``), and the one
builder of a decode, alone or as a row of the batch (``request``, over ``batching``).

It sees a grammar only through ``grammar.matcher.GrammarMatcher`` and a model only through
``models.protocol.SequenceModel``; it knows nothing of file formats, HTTP or grammar internals.
"""
