"""What the isolated sandbox network costs against the host's network."""
