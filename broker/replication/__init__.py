"""The replication plane: partitions kept on several brokers (seed 002, section 4.7).

``leader_state`` (what a partition's leader knows of its followers: their log ends, the
in-sync replicas and the high watermark), ``leader_election`` (the controller's election
rules) and ``divergence`` (where a follower's log leaves its leader's, by leader epochs). The replica fetcher, the replica manager and
the controller's requests build on it (issue 13).
"""
