"""Character-level tokenization (part 2): vocabulary, encoding, decoding."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.tokenizer import build_vocab, decode_tokens, encode_prompt

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


@pytest.fixture
def vocab():
    return build_vocab(["hello world", "held"], SPECIALS)


def test_specials_take_the_first_ids_in_order_then_sorted_characters(vocab):
    assert vocab["id_to_token"] == SPECIALS + [" ", "d", "e", "h", "l", "o", "r", "w"]


def test_token_to_id_inverts_id_to_token(vocab):
    assert {t: i for i, t in enumerate(vocab["id_to_token"])} == vocab["token_to_id"]


def test_build_vocab_does_not_mutate_the_callers_lists():
    specials, corpus = ["<bos>"], ["ba"]
    build_vocab(corpus, specials)
    assert specials == ["<bos>"] and corpus == ["ba"]


def test_a_character_equal_to_a_special_keeps_the_special_id():
    vocab = build_vocab(["a#b"], ["#"])
    assert vocab["id_to_token"] == ["#", "a", "b"]


def test_duplicate_special_tokens_raise():
    with pytest.raises(ValueError, match="more than once"):
        build_vocab(["ab"], ["<bos>", "<eos>", "<bos>"])


@pytest.mark.parametrize("special", ["", 3, None])
def test_invalid_special_tokens_raise(special):
    with pytest.raises(ValueError, match="non-empty strings"):
        build_vocab(["ab"], ["<bos>", special])


def test_encode_prepends_bos_by_default(vocab):
    assert encode_prompt("he", vocab) == [1, 7, 6]
    assert encode_prompt("he", vocab, add_bos=False) == [7, 6]


def test_unknown_characters_become_unk(vocab):
    assert encode_prompt("h?!", vocab, add_bos=False) == [7, 3, 3]


def test_unknown_character_without_unk_raises_naming_it():
    vocab = build_vocab(["abc"], ["<bos>"])
    with pytest.raises(ValueError, match=r"'z' \(position 1\)"):
        encode_prompt("az", vocab)


def test_add_bos_without_a_bos_token_raises():
    with pytest.raises(ValueError, match="<bos>"):
        encode_prompt("a", build_vocab(["a"], ["<unk>"]))


def test_special_token_text_is_encoded_as_characters():
    vocab = build_vocab(["<eos>"], ["<eos>"])
    assert len(encode_prompt("<eos>", vocab, add_bos=False)) == 5


@given(st.text(alphabet="abc xyz.", max_size=50))
def test_round_trip_of_known_text(text):
    vocab = build_vocab(["abc xyz."], SPECIALS)
    assert decode_tokens(encode_prompt(text, vocab), vocab) == text


def test_decode_skips_specials_unless_asked(vocab):
    ids = [1] + encode_prompt("hold", vocab, add_bos=False) + [2]
    assert decode_tokens(ids, vocab) == "hold"
    assert decode_tokens(ids, vocab, skip_special=False) == "<bos>hold<eos>"


def test_decode_accepts_numpy_ids(vocab):
    assert decode_tokens(np.array([7, 6]), vocab) == "he"


@pytest.mark.parametrize("bad_id", [12, 100, -1])
def test_out_of_range_ids_raise(vocab, bad_id):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_tokens([7, bad_id], vocab)


@pytest.mark.parametrize("bad_id", [1.0, "3", True])
def test_non_integer_ids_raise(vocab, bad_id):
    with pytest.raises(ValueError, match="integers"):
        decode_tokens([bad_id], vocab)
