"""The llama.cpp runtime: a GGUF as stored, run through llama.cpp (``model``: weights, sequences, rows,
loading and the GGUF's tokenizer). Importing this package loads nothing.
"""
