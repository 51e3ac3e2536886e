"""What runs above one library: folders watched for changes, and the index jobs that the
app, the CLI's ``watch`` and the socket server queue. Everything here holds a ``Library``;
nothing below imports from here."""
