"""The ``acp`` agent kind: an agent program driven over the Agent Client Protocol."""
