"""HTML routes: parse the request, call the domain, render a page or an htmx partial."""
