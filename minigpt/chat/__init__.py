"""Conversations: the chat data set built from Tiny Shakespeare, loading and checking conversations,
and tokenizing them with the loss on the assistant's tokens only (chat fine-tuning)."""
