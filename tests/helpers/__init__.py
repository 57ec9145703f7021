"""What several test modules share: data builders, ports, processes, terminals, the import reader, expectations."""
