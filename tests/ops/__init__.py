"""Tests of streamdedup.ops."""
