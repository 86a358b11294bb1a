"""Support for the end-to-end suite: real processes (ops_devsupport.processes), and the small
real peers they talk to (a State Hub and event sink stand-in, a response-dropping
proxy), the database and git read from outside."""
