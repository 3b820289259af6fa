"""Figure builders: pure functions from numbers bertcore computed to plotly figures and tables, one module per page
(or page group): ``figures.train`` serves the Train page, ``figures.heads`` the Heads page, ``figures.forward*``
Inside the model, and so on. They never call ``st.*``."""
