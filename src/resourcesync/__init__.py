"""resourcesync: ResourceSync (ANSI/NISO Z39.99) for Sources, Destinations, hubs and LIRS."""

__version__ = "0.1.0"
