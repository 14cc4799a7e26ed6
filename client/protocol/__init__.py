"""The Kafka 0.7 wire protocol and rill's extensions, as a sans-IO codec.

Nothing here owns a socket: functions turn bytes into values and values into bytes.
The broker and every client share this package.
"""
