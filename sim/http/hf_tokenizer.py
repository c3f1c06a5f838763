"""The served model's tokenizer in Hugging Face's format, for the clients that count tokens
with one (`vllm bench serve`, GuideLLM and AIPerf take `--tokenizer FOLDER`): with it, their
token counts are the server's.

`tokenizer_files(vocab_size, max_seq_len)` gives the folder's files by name:
- `tokenizer.json` (the `tokenizers` library's format): every character its own token (a
  pre-tokenizer that isolates each one, a word-level vocabulary of the model's characters, ids
  as `sim.http.text.model_vocab` gives them), "<unk>" for a character outside it, "<bos>"
  before every encoded text as the server puts it before every prompt;
- `tokenizer_config.json`: the special tokens, the context length, and the chat template
  (`sim.http.text.render_chat`, after "<bos>");
- `special_tokens_map.json`.

One difference stays: a Hugging Face tokenizer reads "<bos>", "<eos>" or "<unk>" written in a
text as one special token, where the server reads them as characters.
"""

from __future__ import annotations

import json

from .text import SPECIAL_TOKENS, model_vocab

BOS, EOS, UNK = SPECIAL_TOKENS
# render_chat's template, in Jinja: one "role: text" line per message, then "assistant:"; a
# content of text parts joined with newlines, as the server joins them (`messages.py`)
# (the newlines as expressions: transformers trims one that follows a block tag)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if not loop.first %}{{ '\\n' }}{% endif %}"
    "{{ part['text'] }}{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}assistant:")


def tokenizer_files(vocab_size: int, max_seq_len: int) -> dict[str, str]:
    """{file name: text} of the tokenizer folder of a served model of `vocab_size` tokens and a
    context of `max_seq_len`."""
    token_to_id = model_vocab(vocab_size)["token_to_id"]
    bos_id = token_to_id[BOS]
    specials = [{"id": token_to_id[t], "content": t, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": True} for t in SPECIAL_TOKENS]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"},
                          "behavior": "Isolated", "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}}},
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": token_to_id, "unk_token": UNK},
    }
    special_map = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **special_map,
              "model_max_length": max_seq_len, "add_bos_token": True,
              "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}
    return {name: json.dumps(data, indent=1, ensure_ascii=False) + "\n" for name, data in
            (("tokenizer.json", tokenizer), ("tokenizer_config.json", config),
             ("special_tokens_map.json", special_map))}
