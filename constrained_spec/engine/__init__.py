"""The engine: the decode loop (``loop``), draft blocks (``block``), proposers behind one interface
(``proposers``), adaptive draft length (``draft_length``) and stats and hooks (``stats``).

It sees a grammar only through ``grammar.matcher.GrammarMatcher`` and a model only through
``models.protocol.SequenceModel``; it knows nothing of file formats, HTTP or grammar internals.
"""
