"""Tests of streamdedup.store."""
