"""Saved tokenizer folders with the same bytes load as one object (the default pair's target and draft),
so the second load costs no parse and the vocabulary check sees one tokenizer; other bytes, another one."""

from __future__ import annotations

from constrained_spec.grammar import vocab
from constrained_spec.models.store.shared_tokenizers import shared_tokenizer


def test_same_files_one_tokenizer_other_files_another(gpt2_tokenizer, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (a, b, c):
        gpt2_tokenizer.save_pretrained(folder)
    (c / "chat_template.jinja").write_text("{{ messages }}")  # one file differs: not the same tokenizer
    first = shared_tokenizer(a)
    assert shared_tokenizer(b) is first
    other = shared_tokenizer(c)
    assert other is not first and other.chat_template == "{{ messages }}"
    assert first("Hello there")["input_ids"] == gpt2_tokenizer("Hello there")["input_ids"]


def test_the_vocabulary_check_skips_one_tokenizer_and_checks_two(gpt2_tokenizer, tmp_path, monkeypatch):
    calls: list[object] = []
    real = vocab.build_vocabulary

    def counting(tokenizer, *args, **kwargs):
        calls.append(tokenizer)
        return real(tokenizer, *args, **kwargs)

    monkeypatch.setattr(vocab, "build_vocabulary", counting)
    gpt2_tokenizer.save_pretrained(tmp_path / "a")
    gpt2_tokenizer.save_pretrained(tmp_path / "b")
    one, same = shared_tokenizer(tmp_path / "a"), shared_tokenizer(tmp_path / "b")
    vocab.check_same_vocabulary(one, same, 50257, 50257)
    assert calls == []  # one object: nothing to compare
    vocab.check_same_vocabulary(one, gpt2_tokenizer, 50257, 50257)  # control: two objects are compared id by id
    assert len(calls) == 2
