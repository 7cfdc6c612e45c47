"""Behaviour vectors of the scheduling engine, shared by the tests that replay them and the tests
that check every reason code is produced."""
