"""Tests of streamdedup.engine.sealed."""
