"""Tests of streamdedup.kafka."""
