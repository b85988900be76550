"""One module per codebase: what its models take and return (see ``mmpar_zoo.codebase``)."""
