"""The data plane: the Kafka 0.7 wire protocol served from one event loop.

``server`` (the event loop and listener), ``connection`` (one client connection:
frames in, response slots out, sendfile'd file slices), ``handlers`` (the table from
request type to handler), ``delayed`` (long-poll fetches and fsync acknowledgements),
``topic_creation`` (CREATE_TOPIC off the loop), and the limits a client cannot use up
for everyone (``connection_table``, ``request_memory``, ``throttled_log``).
"""
