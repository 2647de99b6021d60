"""Tests of streamdedup.store.segment."""
