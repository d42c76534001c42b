"""Orders: an order, its lines, and the view that places one and notifies in one transaction."""
