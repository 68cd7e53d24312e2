"""Zero-cost proposals: the grammar's forced strings (with a stable end) and prompt lookup."""

from __future__ import annotations

from constrained_spec.engine.proposers import GrammarStrings, prompt_lookup
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, AutomatonMatcher
from constrained_spec.grammar.vocab import TokenVocabulary

# A JSON-ish vocabulary where the key's closing quote, colon and the value's opening quote can be
# split two ways: '":"' + 'M...' (canonical for the forced text alone) or '":' + '"M' (what a model
# trained on whole documents writes when the value starts with M).
PIECES = ['{"', "name", '":"', '":', '"', '"M', "M", "a", "x", '"}', "}", ":", ',"', "age", "1", "2"]
TOKENS = {i: p.encode() for i, p in enumerate(PIECES)}
EOS = len(PIECES)


def vocab() -> TokenVocabulary:
    return TokenVocabulary(tokens=dict(TOKENS), eos_token_ids=(EOS,), size=EOS + 1)


def greedy_encode(text: str) -> list[int]:
    """Longest-match tokenization (stands in for the tokenizer's canonical split)."""
    by_text = {p: i for i, p in enumerate(PIECES)}
    out, i = [], 0
    while i < len(text):
        for size in range(len(text) - i, 0, -1):
            if text[i : i + size] in by_text:
                out.append(by_text[text[i : i + size]])
                i += size
                break
        else:
            raise ValueError(text[i:])
    return out


def compile_regex(regex: str):
    return AutomatonCompiler(vocab(), disk_cache=False, compile_timeout=None).compile(regex)


def state_after(automaton, text: str) -> AutomatonMatcher:
    """A matcher that has accepted ``text`` (greedily tokenized)."""
    matcher = AutomatonMatcher(automaton)
    for token in greedy_encode(text):
        matcher.advance(token)
    return matcher


def names(ids) -> list[str]:
    return [PIECES[i] for i in ids]


def test_forced_string_stops_before_a_token_that_free_text_could_merge_into():
    automaton = compile_regex(r'\{"name":"[Max]+"\}')
    state = state_after(automaton, '{"name')
    assert state.forced_bytes() == b'":"'
    # canonical: ['":"']; but '"M' could start at the value's quote and run into the free text
    assert names(GrammarStrings(greedy_encode, automaton.vocab, stable_end=False).tokens(state)) == ['":"']
    assert names(GrammarStrings(greedy_encode, automaton.vocab).tokens(state)) == []


def test_forced_string_keeps_its_end_where_nothing_allowed_can_merge():
    # The value is a number: no allowed token starts with '"' or ':' and runs on into digits.
    automaton = compile_regex(r'\{"age":[12]+\}')
    state = state_after(automaton, '{"age')
    assert names(GrammarStrings(greedy_encode, automaton.vocab).tokens(state)) == ['":']
    # A value of a and x cannot merge with the quote (no '"a' or '"x' token): keep the whole string.
    automaton = compile_regex(r'\{"name":"[ax]+"\}')
    state = state_after(automaton, '{"name')
    assert names(GrammarStrings(greedy_encode, automaton.vocab).tokens(state)) == ['":"']


def test_forced_string_that_ends_the_document_is_kept_whole():
    automaton = compile_regex(r'\{"name":"M"\}')
    state = state_after(automaton, '{"name":"M')
    assert names(GrammarStrings(greedy_encode, automaton.vocab).tokens(state)) == ['"}']


def test_prompt_lookup_copies_what_followed_the_last_ngram():
    context = [1, 2, 3, 4, 5, 9, 9, 2, 3]
    assert prompt_lookup(context, max_ngram=3, min_ngram=2) == [4, 5, 9, 9, 2, 3]
    assert prompt_lookup(context, max_ngram=3, min_ngram=3) == []


def test_text_lookup_finds_a_value_the_prompt_spells_with_other_tokens(gpt2_tokenizer):
    """In the prompt ``Reykjavik`` follows a space; in a JSON string it follows a quote, so token
    n-grams never match, while the bytes do once a few of them are out."""
    from constrained_spec.engine.proposers import PromptText
    from constrained_spec.grammar.vocab import build_vocabulary

    tok = gpt2_tokenizer
    vocab = build_vocabulary(tok, 50257)
    encode = lambda text: tok.encode(text)  # noqa: E731
    prompt = encode("Weather report: it is cold in Reykjavik today, minus three degrees.\n")
    lookup = PromptText(vocab, encode, min_match=6, max_bytes=12, min_word=6)  # ordinary matches only

    early = prompt + encode('{"city":"Reykj')  # 5 bytes of the value: below min_match
    assert prompt_lookup(early, 3, 3) == [] and lookup.propose(early) == []
    context = prompt + encode('{"city":"Reykja')
    assert prompt_lookup(context, 3, 3) == []  # the tokens differ from the prompt's
    proposal = lookup.propose(context)
    text = tok.decode(proposal)
    assert proposal and "vik today, minus"[: len(text)] == text  # the canonical tokens of what followed, cut
    assert len(text.encode()) < 12  # the last token of the 12-byte window is dropped
    # drafted tokens count as context; another request's context starts over
    assert tok.decode(lookup.propose(context[:-1], context[-1:])) == text
    other = encode("Nothing in common here at all.") + encode("Reykjavik")
    assert lookup.propose(other) == []


def test_text_lookup_matches_a_string_value_start_at_a_word_start(gpt2_tokenizer):
    """A value's first bytes follow a quote in the output and a space in the prompt: matched at a
    word start once ``min_word`` bytes are out, before ``min_match`` bytes of the value exist."""
    from constrained_spec.engine.proposers import PromptText
    from constrained_spec.grammar.vocab import build_vocabulary

    tok = gpt2_tokenizer
    encode = lambda text: tok.encode(text)  # noqa: E731
    lookup = PromptText(build_vocabulary(tok, 50257), encode, min_match=6, max_bytes=12, min_word=3)
    prompt = encode("Report from Greykirk: cold in Reykjavik today, minus three.\n")

    proposal = tok.decode(lookup.propose(prompt + encode('{"city":"Rey')))
    assert proposal and "kjavik today"[: len(proposal)] == proposal  # not the 'rey' inside Greykirk
    assert lookup.propose(prompt + encode('{"city":"Re')) == []  # two bytes: too few to trust
    assert lookup.propose(prompt + encode('{"city":"Zyx')) == []  # no word of the prompt starts so
    # a quote that closes a string is no value start: '"a":"x","b":Rey' has no open string
    assert lookup.propose(prompt + encode('{"a":"x","b":Rey')) == []
