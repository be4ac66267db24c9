cases_postgresql() { :; }
