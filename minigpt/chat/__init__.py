"""Chat: conversations -> encoding -> chat_format (a chat-ready model) -> session (talking to it)."""
