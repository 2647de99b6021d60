"""Tests of streamdedup.inputs."""
