"""Talking to a model: a multi-turn session whose history is cut to the context (session), the
terminal loop of scripts/chat.py (terminal), and the shipped conversation set built from the play
(shakespeare_dialogue). Conversations as training data are a data format (minigpt.data)."""
