"""Thin adapters: each checks a framework's tool calls with troy before
they run and streams the run into troy's live audit, importing its
framework only when used."""
