"""Security shared by clients and brokers: principals, SASL mechanisms, ACL and quota value types, TLS settings."""
