"""Talking to a model: the chat stage, above generation (it samples replies) and below training
(chat fine-tuning encodes conversations with it).

    shakespeare_dialogue, conversations -> encoding -> corpus, collator; chat_format; session -> terminal

shakespeare_dialogue: the shipped conversation set, built from the play; conversations: the
`{"messages": [...]}` JSON lines read and checked; encoding: a conversation as token ids and the
assistant-token mask (the chat template, `minigpt.data.chat_template`); corpus: the encoded,
cached conversations of a chat run; collator: padded batches; chat_format: a (model, tokenizer)
pair made chat-ready when it is not (role tokens, template, embeddings, end-of-turn); session:
multi-turn chat with a history cut to the context; terminal: scripts/chat.py's loop.
"""
