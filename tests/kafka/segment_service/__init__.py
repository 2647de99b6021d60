"""Tests of streamdedup.kafka.segment_service."""
