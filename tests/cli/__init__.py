"""Tests of streamdedup.cli."""
