"""Helpers the tests share: a real broker's topics and streams, the committed view of
a transactional topic, and running the CLI.  Not tests themselves."""
