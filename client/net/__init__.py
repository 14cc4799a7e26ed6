"""The client's network layer: the one socket driver, the one selector loop, and what the
broker's event loop shares with it (the wake-up, the timer heap).

Framing and the pairing of responses with requests are sans-IO and live in
rill.client.protocol.connection; this package moves their bytes.
"""
