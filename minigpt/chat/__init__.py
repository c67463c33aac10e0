"""Talking to a model: a session whose history is cut to the context (session) and the terminal
loop of scripts/chat.py (terminal)."""
