"""Tests of streamdedup.sketch."""
