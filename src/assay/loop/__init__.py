"""The experiment loop: the driver and the parts it composes."""
