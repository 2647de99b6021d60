"""Tests of streamdedup.engine."""
