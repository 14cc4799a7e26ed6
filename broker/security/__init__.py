"""The broker's security: credential, ACL and quota stores, the authorizer, and quota enforcement."""
