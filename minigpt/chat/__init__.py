"""Talking to a model: a session whose history is cut to the context (session), the terminal loop
of scripts/chat.py (terminal), and the conversation set built from the play (shakespeare_dialogue)."""
